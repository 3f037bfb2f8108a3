"""Which simulated host the running code lives on: one context variable.

A task inherits its creator's context, so everything a task on a host starts lives there
too: the tasks a server's protocol starts, callbacks scheduled from the host, timers.

Part of ``net``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trace`` (see
tests/layout.py).
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ._world import Host

__all__ = ["HOST", "current_host"]

HOST: Final[contextvars.ContextVar[Host | None]] = contextvars.ContextVar(
    "virtualtime.net.host", default=None
)


def current_host() -> Host | None:
    """The simulated host the calling code lives on, or None (it lives on no host)."""
    return HOST.get()
