"""Per-host clocks on the loop: what ``loop.time()`` and the loop's timers read on a host.

A world whose hosts keep clocks of their own (an offset, a rate) puts stand-ins for the loop's
``time``, ``call_at`` and ``call_later`` on the loop, and a view on its ``patch_time`` clocks:
code living on a host reads that host's clock, and its timers are converted to the loop's
time; code on no host reads the loop's own.  The world's own timers never go through them
(see :class:`~virtualtime.net._links.LoopDriver`).  Taken off again when the world detaches.

Part of ``net``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trace`` (see
tests/layout.py).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from ._context import HOST as _HOST

if TYPE_CHECKING:
    from ._world import Network

__all__ = ["views_off", "views_on"]

_ABSENT: Final = object()


def views_on(self: Network) -> None:
    if self._viewing:
        return
    loop = self.loop
    assert loop is not None
    self._viewing = True
    own = loop.__dict__
    for name in ("time", "call_at", "call_later"):
        self._saved[name] = own.get(name, _ABSENT)
    base_time: Callable[[], float] = type(loop).time.__get__(loop)
    base_at = own.get("call_at") or type(loop).call_at.__get__(loop)
    base_later = own.get("call_later") or type(loop).call_later.__get__(loop)

    def time() -> float:
        host = _HOST.get()
        if host is None or host.world is not self:
            return base_time()
        return host.clock.seconds(loop._vt_ticks)

    def call_at(when: float, callback: Any, *args: Any, **kwargs: Any) -> Any:
        host = _HOST.get()
        if (
            host is not None
            and host.world is self
            and not host.clock.identity
            and isinstance(when, int | float)
            and math.isfinite(when)
        ):
            when = host.clock.loop_seconds(when)
        return base_at(when, callback, *args, **kwargs)

    def call_later(delay: float, callback: Any, *args: Any, **kwargs: Any) -> Any:
        host = _HOST.get()
        if (
            host is not None
            and host.world is self
            and host.clock.rate != 1.0
            and isinstance(delay, int | float)
            and math.isfinite(delay)
        ):
            delay = delay / host.clock.rate
        return base_later(delay, callback, *args, **kwargs)

    loop.time = time  # type: ignore[method-assign]
    loop.call_at = call_at  # type: ignore[method-assign]
    loop.call_later = call_later  # type: ignore[method-assign]
    loop._vt_clock_views = True  # anyio's sleep takes call_later too
    loop._vt_update_fast()
    patch = loop._vt_patch
    if patch is not None:
        self._saved["patch"] = (patch.seconds, patch._source, patch.view)
        patch.seconds = time
        patch._source = None
        patch.view = functools.partial(_local_ticks, self)


def _local_ticks(self: Network, ticks: int) -> int:
    host = _HOST.get()
    if host is None or host.world is not self:
        return ticks
    return host.clock.ticks(ticks)


def views_off(self: Network) -> None:
    if not self._viewing:
        return
    loop = self.loop
    assert loop is not None
    for name in ("time", "call_at", "call_later"):
        saved = self._saved.pop(name)
        if saved is _ABSENT:
            loop.__dict__.pop(name, None)
        else:
            loop.__dict__[name] = saved
    loop._vt_clock_views = False
    loop._vt_update_fast()
    patch = loop._vt_patch
    saved_patch = self._saved.pop("patch", None)
    if patch is not None and saved_patch is not None:
        patch.seconds, patch._source, patch.view = saved_patch
    self._viewing = False
