"""virtualtime: a virtual clock for async Python.

A real asyncio event loop whose ``time()`` is virtual: when every task waits on a timer, the
loop jumps to the next one instead of blocking, so a simulated year takes milliseconds and
every run is the same run.  Start with :func:`run` or :func:`new_event_loop`; drive time by
hand with the loop's ``step``/``evolve``/``run_until``/``fast_forward`` or their awaitable
twins here; trio support lives in :mod:`virtualtime.trio`, simulation tools in
:mod:`virtualtime.sim`.
"""

from ._control import evolve as evolve
from ._control import fast_forward as fast_forward
from ._control import now as now
from ._control import peek as peek
from ._control import run_until as run_until
from ._control import settle as settle
from ._control import sleep as sleep
from ._control import sleep_until as sleep_until
from ._control import step as step
from ._errors import DeadlockError as DeadlockError
from ._errors import RunawayError as RunawayError
from ._errors import VirtualTimeError as VirtualTimeError
from ._loop import HistoryRecord as HistoryRecord
from ._loop import VirtualEventLoop as VirtualEventLoop
from ._runner import new_event_loop as new_event_loop
from ._runner import run as run
from ._time import RESOLUTION as RESOLUTION

__version__ = "0.1.0"

__all__ = (
    "DeadlockError",
    "HistoryRecord",
    "RESOLUTION",
    "RunawayError",
    "VirtualEventLoop",
    "VirtualTimeError",
    "evolve",
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
)
