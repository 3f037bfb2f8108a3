"""The fast path's two helpers, shared by the kit, the timer and the vehicles.

On asyncio the sim toolkit sleeps on a plain future resolved by a loop timer (``call_at`` /
``call_later``) instead of an anyio ``CancelScope`` per sleep; whoever wants to wake the
sleeper early resolves the future.  The timer callback is the virtual loop's own
``set_result_unless_cancelled``: the loop recognises it and resolves the future in timer
order without a trip through the ready queue (``virtualtime.sleep`` relies on the same).
On any other asyncio loop it is an ordinary callback.
"""

from __future__ import annotations

import asyncio
from typing import Any

import sniffio

__all__ = ["asyncio_loop", "set_result"]

try:
    from .._loop import set_result_unless_cancelled as set_result
except ImportError:  # pragma: no cover - the loop module was reorganised

    def set_result(fut: asyncio.Future[Any], result: Any) -> None:
        if not fut.cancelled():
            fut.set_result(result)


def asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop, or None on another async library (trio)."""
    if sniffio.current_async_library() == "asyncio":
        return asyncio.get_running_loop()
    return None
