"""The fast paths shared by the kit, the timer and the vehicles.

On asyncio the sim toolkit sleeps on a plain future resolved by a loop timer (``call_at`` /
``call_later``) instead of an anyio ``CancelScope`` per sleep; whoever wants to wake the
sleeper early resolves the future.  The timer callback is the virtual loop's own
``set_result_unless_cancelled``: the loop recognises it and resolves the future in timer
order without a trip through the ready queue (``virtualtime.sleep`` relies on the same).
On any other asyncio loop it is an ordinary callback.

A wait that needs no loop round
-------------------------------
When the task about to wait is the only thing that can run -- nothing is ready, no timer and
no drive comes due before (or at) the instant it waits for, nothing outside the loop can
deliver -- the virtual loop's next round would do exactly one thing: jump to that instant and
wake this task.  :func:`jump_to` does it in place: it moves the loop's clock and lets the
task carry on without suspending, which is the same run, without the round.  It is the
loop's own fast-path decision (``VirtualEventLoop._run_once``), read from the loop's state;
any doubt (debug mode, history kept for a trace, rate or manual mode, outside work, a
pending cancellation) means no jump.  One wait in :data:`_ROUND_EVERY` takes the round
anyway, so a model that never needs the loop still lets it deliver ``Ctrl-C`` and
cancellations.  The contract with the loop (the attributes read here) is pinned by
``tests/test_sim_fast.py``; the loop's maintainers may turn it into a loop method.

On trio the toolkit uses trio's own primitives (``trio.CancelScope`` deadlines,
``trio.lowlevel.wait_task_rescheduled``) instead of anyio's wrappers around them.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

import sniffio

from .._shared._time import TICKS_PER_SECOND

__all__ = ["asyncio_loop", "jump_by", "jump_to", "set_result", "trio_module"]

try:
    from .._engine._loop import set_result_unless_cancelled as set_result
except ImportError:  # pragma: no cover - the loop module was reorganised

    def set_result(fut: asyncio.Future[Any], result: Any) -> None:
        if not fut.cancelled():
            fut.set_result(result)


_ROUND_EVERY: Final = 256
"""At most this many waits in a row skip the loop round (a power of two)."""

_FAR: Final = 1e18
"""Delays at or past this go the loop's slow way (``call_later``'s own limit)."""

_current_task: Final = asyncio.current_task
_skipped = 0
_trio: Any = None


def trio_module() -> Any:
    """The ``trio`` module, imported on first use (trio is an optional dependency; the
    toolkit's non-asyncio path runs only under trio)."""
    global _trio
    if _trio is None:
        import trio

        _trio = trio
    return _trio


def asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop, or None on another async library (trio)."""
    if sniffio.current_async_library() == "asyncio":
        return asyncio.get_running_loop()
    return None


def jump_to(loop: Any, ticks: int, task: asyncio.Task[Any] | None) -> bool:
    """Move the virtual loop to tick ``ticks`` now if its next round would do only that.

    True: the clock reads ``ticks`` and the calling task goes on at once (it must not
    suspend for this wait).  False: wait the ordinary way (a loop timer).  Only from
    ``task``, running on ``loop`` (None: look it up).  The cheap refusals come first: most
    waits of a busy model find something else due sooner.
    """
    global _skipped
    try:
        if loop._ready:
            return False
        heap = loop._vt_heap
        if (heap and heap[0][0] <= ticks) or ticks <= loop._vt_ticks:
            return False
        drives = loop._vt_drives
        if (
            (drives and drives[0][0] <= ticks)
            or not loop._vt_fast
            or loop._stopping
            or loop._debug
            or loop._vt_history is not None
            or not loop._vt_world.quiet()
        ):
            return False
    except AttributeError:  # not a virtual loop
        return False
    if task is None:
        task = _current_task(loop)
    if task is None or task.cancelling():
        return False
    _skipped += 1
    if not _skipped & (_ROUND_EVERY - 1):
        return False
    loop._vt_set_ticks(ticks)
    return True


def jump_by(loop: Any, delay: float, task: asyncio.Task[Any] | None) -> bool:
    """:func:`jump_to` the instant ``loop.call_later(delay, ...)`` would fire at."""
    try:
        if loop._ready or not 0 < delay < _FAR:
            return False
        step = round(delay * TICKS_PER_SECOND)
        ticks = loop._vt_ticks + (step if step > 0 else 1)
        heap = loop._vt_heap
        if heap and heap[0][0] <= ticks:
            return False
    except AttributeError:  # not a virtual loop
        return False
    return jump_to(loop, ticks, task)
