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
pending cancellation) means no jump.  One wait in ``JUMP_ROUND_EVERY`` (256, counted per
loop) takes the round anyway, so a model that never needs the loop still lets it deliver
``Ctrl-C`` and cancellations.  The rule is a documented contract of the loop
(``VirtualEventLoop._vt_jump_to`` and ``_vt_jump_by``, in ``virtualtime/_engine/_waits.py``,
whose docstring states it; ``docs/loop.md`` explains it); :func:`jump_to` and :func:`jump_by`
are its callers here and read nothing else of the loop, and ``tests/test_sim_fast.py`` pins
the contract.

On trio the toolkit waits on virtualtime's trio clock through the clock's kit waits
(``virtualtime/trio/_park.py``: the task parks on the clock, or goes on in place when nothing
else can happen first); on another trio clock, on a ``trio.CancelScope`` deadline.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from .._engine._handles import set_result_unless_cancelled as set_result

__all__ = ["asyncio_loop", "current_library", "jump_by", "jump_to", "set_result", "trio_module"]

_trio: Any = None


def trio_module() -> Any:
    """The ``trio`` module, imported on first use (trio is an optional dependency; the
    toolkit's non-asyncio path runs only under trio)."""
    global _trio
    if _trio is None:
        import trio

        _trio = trio
    return _trio


def _in_trio_task() -> bool:
    """Is the calling code a trio task?  Never imports trio: if nobody has, nothing runs on it."""
    trio = sys.modules.get("trio")
    if trio is None:
        return False
    lowlevel = trio.lowlevel
    in_task = getattr(lowlevel, "in_trio_task", None)  # trio >= 0.26
    if in_task is not None:
        return bool(in_task())
    try:
        lowlevel.current_task()
    except RuntimeError:
        return False
    return True


def current_library() -> str | None:
    """``"asyncio"``, ``"trio"``, or None outside any running async library.

    What the kit needs to know to pick its waits, asked of the libraries themselves (no
    helper package): trio is asked whether this is a trio task, and only if trio is already
    imported; otherwise the running asyncio loop decides.  trio is asked even when an
    asyncio loop runs, because a trio run in guest mode lives inside one.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return "trio" if _in_trio_task() else None
    return "trio" if _in_trio_task() else "asyncio"


def asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop, or None on another async library (trio)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return None if _in_trio_task() else loop


def jump_to(loop: Any, ticks: int, task: asyncio.Task[Any] | None) -> bool:
    """Move the virtual loop to tick ``ticks`` now if its next round would do only that.

    True: the clock reads ``ticks`` and the calling task goes on at once (it must not
    suspend for this wait).  False: wait the ordinary way (a loop timer), and always False
    on a loop that is not virtual.  Only from ``task``, running on ``loop`` (None: look it
    up).  The rule, and what True promises, is the loop's contract
    (``VirtualEventLoop._vt_jump_to``); this reads no other private field of the loop.
    """
    try:
        jump = loop._vt_jump_to
    except AttributeError:  # not a virtual loop
        return False
    result: bool = jump(ticks, task)
    return result


def jump_by(loop: Any, delay: float, task: asyncio.Task[Any] | None) -> bool:
    """:func:`jump_to` the instant ``loop.call_later(delay, ...)`` would fire at."""
    try:
        jump = loop._vt_jump_by
    except AttributeError:  # not a virtual loop
        return False
    result: bool = jump(delay, task)
    return result
