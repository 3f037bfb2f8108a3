"""Which virtual clock runs the current task: the asyncio loop's, trio's, or none.

Owns :func:`_running_backend`, the one check behind the ``virtual_time`` fixture's methods and
the anyio runner's "does this test really run in virtual time" -- with the messages that say
what to do when a test runs on a real loop or clock (typically a runner kept alive by a
wider-scoped anyio fixture).

Part of ``testing``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trio``,
``net``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import sys
from typing import Literal


def _running_backend(what: str) -> Literal["asyncio", "trio"]:
    """Which virtual clock runs the current task; a VirtualTimeError if none does."""
    import asyncio

    from .._engine._loop import VirtualEventLoop
    from .._shared._errors import UsageError

    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is not None:
        if isinstance(loop, VirtualEventLoop):
            return "asyncio"
        raise UsageError(
            f"{what} needs virtual time, but it runs on a real event loop "
            f"({type(loop).__name__}).  With anyio, a runner kept alive by an async fixture of "
            "a wider scope was built before this test: give that fixture's tests the same "
            "virtualtime mark (e.g. mark the whole module)"
        )
    trio_module = sys.modules.get("trio")
    if trio_module is not None:
        try:
            clock = trio_module.lowlevel.current_clock()
        except RuntimeError:
            clock = None
        if clock is not None:
            virtual_trio = sys.modules.get("virtualtime.trio")
            if virtual_trio is not None and isinstance(clock, virtual_trio.VirtualClock):
                return "trio"
            raise UsageError(
                f"{what} needs virtual time, but trio runs with {type(clock).__name__}.  With "
                "anyio, a runner kept alive by an async fixture of a wider scope was built "
                "before this test: give that fixture's tests the same virtualtime mark"
            )
    raise UsageError(
        f"{what} needs a running virtual event loop or trio VirtualClock; call it from the "
        "async test (or an async fixture of it)"
    )


def _require_virtual(what: str) -> None:
    _running_backend(what)
