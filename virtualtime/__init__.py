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
* :mod:`virtualtime.sim` -- clock trees, periodic timers, timed events, vehicles.
* ``virtualtime run script.py`` on the command line; the pytest plugin's
  ``@pytest.mark.virtualtime`` in tests.
"""

import sys as _sys

from ._anyio import anyio_run as anyio_run
from ._control import evolve as evolve
from ._control import fast_forward as fast_forward
from ._control import now as now
from ._control import peek as peek
from ._control import run_until as run_until
from ._control import settle as settle
from ._control import sleep as sleep
from ._control import sleep_until as sleep_until
from ._control import step as step
from ._control import wall_time as wall_time
from ._errors import DeadlockError as DeadlockError
from ._errors import RunawayError as RunawayError
from ._errors import VirtualTimeError as VirtualTimeError
from ._loop import HistoryRecord as HistoryRecord
from ._loop import VirtualEventLoop as VirtualEventLoop
from ._runner import new_event_loop as new_event_loop
from ._runner import run as run
from ._time import RESOLUTION as RESOLUTION
from .trace import chrome_trace as chrome_trace
from .trace import plot_trace as plot_trace
from .trace import record_span as record_span
from .trace import write_trace as write_trace

__version__ = "0.1.0"

__all__: tuple[str, ...] = (
    "DeadlockError",
    "HistoryRecord",
    "RESOLUTION",
    "RunawayError",
    "VirtualEventLoop",
    "VirtualTimeError",
    "anyio_run",
    "chrome_trace",
    "evolve",
    "fast_forward",
    "new_event_loop",
    "now",
    "peek",
    "plot_trace",
    "record_span",
    "run",
    "run_until",
    "settle",
    "sleep",
    "sleep_until",
    "step",
    "wall_time",
    "write_trace",
)

if _sys.version_info < (3, 16):
    # The legacy path for code that selects its loop through a policy; asyncio removes
    # policies in 3.16, and this export goes with them.
    from ._policy import EventLoopPolicy as EventLoopPolicy

    __all__ = tuple(sorted((*__all__, "EventLoopPolicy")))
