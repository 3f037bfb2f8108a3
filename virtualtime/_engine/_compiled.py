"""The compiled core (``_cwake.c``), loaded and set up once: or None, the pure-Python path.

Every name here is None (``COMPILED`` False) when the core was not built, when
``VIRTUALTIME_PURE_PYTHON=1`` is set, or when the core does not recognise this interpreter's
handle layout; the loop then runs its pure-Python path, which is always correct.  The C
functions mirror Python code of the loop (``_cwake.c`` names, above each one, the function it
mirrors); read the Python first.

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Final

from ._handles import _WAKE_CONTEXT, _WAKERS, _Soon
from ._timers import _CANCELLED, WAITER, SleepTimer

__all__ = ["COMPILED", "core", "core_push_after"]


def _load_core() -> Any:
    """The compiled core (``virtualtime._engine._cwake``), set up; None for the pure-Python path.

    Absent when it was not built (no compiler at install time), ignored with
    ``VIRTUALTIME_PURE_PYTHON=1``, and refused -- silently, the pure path is always correct --
    if it does not recognise this interpreter's handle layout.
    """
    if os.environ.get("VIRTUALTIME_PURE_PYTHON"):
        return None
    try:
        from . import _cwake
    except ImportError:
        return None
    try:
        # asyncio-private: the core reads and writes Handle/TimerHandle slots directly (the
        # fields _Timer and _Soon set); setup() checks each is a plain slot first.
        _cwake.setup(
            WAITER,
            asyncio.TimerHandle,
            _Soon,
            *_WAKERS,
            asyncio.InvalidStateError,
            _WAKE_CONTEXT,
            SleepTimer,
        )
        # asyncio.sleep's timer cancels itself as every asyncio.sleep ends: compiled, that
        # is one Python frame less per wake-up (SleepTimer.cancel stays the reference).
        SleepTimer.cancel = _cwake.sleep_timer_cancel(_CANCELLED)  # type: ignore[method-assign,assignment]
    except (TypeError, AttributeError):  # pragma: no cover - a future CPython's layout
        return None
    return _cwake


_core: Final = _load_core()
core: Final = _core
"""The compiled core module, set up; None on the pure-Python path."""
COMPILED: Final = _core is not None
"""Is the loop running on its compiled core?  (False: the pure-Python path.)"""
_core_fire: Final = None if _core is None else _core.fire
_core_run_ready: Final = None if _core is None else _core.run_ready
_core_plain_rounds: Final = None if _core is None else _core.plain_rounds
core_push_after: Final = None if _core is None else _core.push_after
"""``push_after(heap, next_seq, ticks, delay, priority, item) -> seq``, or None: the entry
:meth:`VirtualEventLoop._vt_wake_after` pushes, in one C call (the sim kit's sleeps use it)."""
