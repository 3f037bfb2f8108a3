"""virtualtime: a virtual clock for async Python.

A real asyncio event loop whose ``time()`` is virtual: when every task waits on a timer, the
loop jumps to the next one instead of blocking, so a simulated year takes milliseconds and
every run is the same run.

Where to start:

* :func:`run` / :func:`new_event_loop` -- asyncio code in virtual time (the loop is
  :class:`VirtualEventLoop`); :func:`anyio_run` for anyio code on asyncio or trio;
  :mod:`virtualtime.trio` for trio's ``VirtualClock``.
* :func:`step`, :func:`evolve`, :func:`run_until`, :func:`fast_forward`, :func:`settle`,
  :func:`peek`, :func:`now` -- drive time from a task (the loop has synchronous twins).
* :func:`sleep` / :func:`sleep_until` -- sleeps with a same-instant priority.
* :func:`wall_time` -- the virtual wall clock (see the loop option ``patch_time``).
* :class:`LoopOptions` -- the options catalogue every entry point checks its options with;
  :func:`configure` -- options (and creation callbacks) for the loops and clocks that other
  code creates in this context.
* :class:`VirtualTimeError` -- the base of every error raised on purpose; each subclass is
  also the builtin you would catch anyway (``ValueError``, ``TypeError``, ``RuntimeError``).
* :mod:`virtualtime.sim` -- clock trees, periodic timers, timed events, vehicles.
* :mod:`virtualtime.net` -- simulated hosts and a network for distributed asyncio code
  (partitions, crashes, pauses, per-host clocks); :func:`explore` runs a scenario under many
  seeds and hands back each failure with the one line that replays it.
* ``virtualtime run script.py`` on the command line (:mod:`virtualtime.cli`); the pytest
  plugin's ``@pytest.mark.virtualtime`` in tests.

Sync or async: one rule.  A function is a coroutine exactly when it must be called from
inside a running loop (``await virtualtime.evolve(dt)`` from a task); a ``run...`` function
or method that drives a loop or clock from outside is synchronous (``virtualtime.run``,
``loop.run_until(t)``, ``virtualtime.trio.run``).

Part of ``api``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``trace``, ``net`` (see tests/layout.py).
"""

import sys as _sys

from . import _backends as _backends  # trio's stand-in among the drivers (see there)
from ._anyio import anyio_run as anyio_run
from ._engine import _anyio_sleep as _anyio_sleep  # anyio's sleep, native on virtual loops
from ._engine._control import evolve as evolve
from ._engine._control import fast_forward as fast_forward
from ._engine._control import now as now
from ._engine._control import peek as peek
from ._engine._control import run_until as run_until
from ._engine._control import settle as settle
from ._engine._control import sleep as sleep
from ._engine._control import sleep_until as sleep_until
from ._engine._control import step as step
from ._engine._control import wall_time as wall_time
from ._engine._history import HistoryRecord as HistoryRecord
from ._engine._loop import VirtualEventLoop as VirtualEventLoop
from ._engine._runner import new_event_loop as new_event_loop
from ._engine._runner import run as run
from ._options import LoopOptions as LoopOptions
from ._options import configure as configure
from ._shared._errors import DeadlockError as DeadlockError
from ._shared._errors import FellBehindError as FellBehindError
from ._shared._errors import InvalidTypeError as InvalidTypeError
from ._shared._errors import InvalidValueError as InvalidValueError
from ._shared._errors import RunawayError as RunawayError
from ._shared._errors import UsageError as UsageError
from ._shared._errors import VirtualTimeError as VirtualTimeError
from ._shared._time import RESOLUTION as RESOLUTION
from ._version import __version__ as __version__
from .net import explore as explore

__all__: tuple[str, ...] = (
    "DeadlockError",
    "FellBehindError",
    "HistoryRecord",
    "InvalidTypeError",
    "InvalidValueError",
    "LoopOptions",
    "RESOLUTION",
    "RunawayError",
    "UsageError",
    "VirtualEventLoop",
    "VirtualTimeError",
    "anyio_run",
    "configure",
    "evolve",
    "explore",
    "fast_forward",
    "new_event_loop",
    "now",
    "peek",
    "run",
    "run_until",
    "settle",
    "sleep",
    "sleep_until",
    "step",
    "wall_time",
)

if _sys.version_info < (3, 16):
    # The legacy path for code that selects its loop through a policy; asyncio removes
    # policies in 3.16, and this export goes with them.
    from ._engine._policy import EventLoopPolicy as EventLoopPolicy

    __all__ = tuple(sorted((*__all__, "EventLoopPolicy")))
