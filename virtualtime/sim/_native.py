"""The virtual loop's native wait and clock, as the sim kit uses them on asyncio.

The kit sleeps on the loop's native wait (``VirtualEventLoop._vt_wake_after``, what
``virtualtime.sleep`` is made of): the future itself waits in the loop's timer heap, with no
timer handle and no callback, and the loop resolves it in timer order.  An interrupt or a
cancellation that resolves it first leaves its heap entry dead, and the loop finds it.  The
kit reads the clock from the loop's own attribute, without a Python frame.  On any other
asyncio loop (:func:`native_loop` is False) the kit uses ``call_later`` and ``loop.time``.
The loop state used here is pinned by ``tests/test_sim_kit_fast.py``.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any, Final

__all__ = [
    "EXACT",
    "FAR",
    "clock_of",
    "core",
    "exact_runs",
    "native_loop",
    "push_after",
    "wake_after",
]

from .._engine._compiled import core as _core
from .._engine._compiled import core_push_after as _core_push_after
from .._engine._loop import VirtualEventLoop as _VirtualEventLoop

push_after: Any = _core_push_after
"""The compiled core's ``push_after(heap, next_seq, ticks, delay, priority, item) -> seq``
(the entry :func:`wake_after` pushes, in one C call), or None on the pure-Python path."""

core: Any = _core
"""The loop's compiled core module (set up), or None on the pure-Python path: the kit's sleep
takes its compiled base (``KitSleep``) from it."""

FAR: Final = 1e18
"""Delays at or past this take the loop's general way (``_vt_wake_after``)."""


def native_loop(loop: asyncio.AbstractEventLoop) -> bool:
    """Does ``loop`` offer the virtual loop's native wait (:func:`wake_after`)?"""
    return isinstance(loop, _VirtualEventLoop) and callable(getattr(loop, "_vt_wake_after", None))


def clock_of(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    """``loop.time``, or a callable reading the same value without a Python frame.

    The virtual loop's ``time()`` returns its ``_vt_now``; the kit reads the clock on every
    request, grant and statistics record, so it reads the attribute from C instead.
    """
    if type(loop).time is _VirtualEventLoop.time and hasattr(loop, "_vt_now"):
        return functools.partial(getattr, loop, "_vt_now")
    return loop.time


def wake_after(loop: Any, delay: float, future: asyncio.Future[Any]) -> None:
    """Have the virtual loop resolve ``future`` (with None) after ``delay`` seconds.

    The loop's native wait (``VirtualEventLoop._vt_wake_after``, what ``virtualtime.sleep``
    is made of): the future itself waits in the loop's timer heap, in timer order, with no
    timer handle and no callback.  ``delay`` is a checked number >= 0.  A future resolved
    before the loop resolves it (an interrupt, a cancellation) leaves a dead entry, which the
    loop finds by itself.  Only for a loop :func:`native_loop` accepts.
    """
    if push_after is not None and 0 < delay < FAR and loop._vt_history is None:
        # The compiled core pushes the same entry _vt_wake_after would, in one C call.
        push_after(loop._vt_heap, loop._vt_seq, loop._vt_ticks, delay, 0, future)
    else:
        loop._vt_wake_after(delay, future)


EXACT: list[int] = [0]
"""How many ``order="simpy"`` simulations are running: while one is, :func:`sleep` makes
SimPy timeouts (started when made), and the compiled sleep hands every call to it."""


def exact_runs(delta: int) -> None:
    """Count ``order="simpy"`` simulations starting (+1) and ending (-1)."""
    EXACT[0] = max(0, EXACT[0] + delta)
    counter = getattr(_core, "kit_exact_runs", None)
    if counter is not None:
        counter(delta)
