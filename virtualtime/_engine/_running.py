"""Which virtual loop runs in this thread: :data:`RUNNING_HERE`, a thread-local.

Set and restored by :meth:`VirtualEventLoop.run_forever
<virtualtime._engine._loop.VirtualEventLoop.run_forever>`; read on every wake-up by
:func:`virtualtime.sleep`, anyio's routed sleep and the compiled core, where it is cheaper
than ``asyncio.get_running_loop()``.

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ._loop import VirtualEventLoop

__all__ = ["RUNNING_HERE"]


class _RunningHere(threading.local):
    """The virtual loop running in this thread (``loop``), or None."""

    loop: VirtualEventLoop | None = None


RUNNING_HERE: Final = _RunningHere()
"""Which virtual loop runs in this thread: what ``asyncio.get_running_loop()`` returns while
one does, set and restored by :meth:`VirtualEventLoop.run_forever`.

For :func:`virtualtime.sleep`, on every wake-up.  On CPython 3.11 ``get_running_loop()``
makes a ``getpid()`` system call each time (to tell a forked child from its parent), which
costs more than the rest of the sleep's own bookkeeping; reading a thread-local does not.
A forked child forgets it (below), as ``get_running_loop()`` does.
"""


def _forget_running_in_child() -> None:
    RUNNING_HERE.loop = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_running_in_child)
