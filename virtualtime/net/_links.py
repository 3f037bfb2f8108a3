"""The world's small parts: links, host clocks, drivers, and the checks of their settings.

Part of ``net``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trace`` (see
tests/layout.py).
"""

from __future__ import annotations

import contextvars
import ipaddress
import math
from typing import TYPE_CHECKING, Any, Final, Protocol

from .._engine._loop import VirtualEventLoop
from .._shared._errors import InvalidTypeError, InvalidValueError, UsageError
from .._shared._time import TICKS_PER_SECOND, shown

if TYPE_CHECKING:
    from ._world import Network

__all__ = [
    "LOOPBACK",
    "UNSET",
    "Driver",
    "HostClock",
    "Link",
    "LoopDriver",
    "Unattached",
    "Unset",
    "bandwidth_setting",
    "check_finite",
    "check_probability",
    "check_rate",
    "check_seconds",
    "is_address",
]


def check_seconds(name: str, value: object, *, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidTypeError(f"{name} must be a number of seconds, got {shown(value)}")
    if not (math.isfinite(value) and value >= 0):
        raise InvalidValueError(f"{name} must be finite and >= 0, got {shown(value)}")
    return float(value)


def check_probability(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidTypeError(f"{name} must be a probability (a number), got {shown(value)}")
    if not 0.0 <= value <= 1.0:
        raise InvalidValueError(f"{name} must be a probability in [0, 1], got {shown(value)}")
    return float(value)


def bandwidth_setting(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidTypeError(f"bandwidth must be bytes per second or None, got {shown(value)}")
    if not (math.isfinite(value) and value > 0):
        raise InvalidValueError(f"bandwidth must be finite and > 0 (bytes/s), got {shown(value)}")
    return float(value)


def check_finite(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidTypeError(f"{name} must be a number of seconds, got {shown(value)}")
    if not math.isfinite(value):
        raise InvalidValueError(f"{name} must be finite, got {shown(value)}")
    return float(value)


def check_rate(value: object, name: str = "clock_rate") -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidTypeError(f"{name} must be a number, got {shown(value)}")
    if not (math.isfinite(value) and value > 0):
        raise InvalidValueError(f"{name} must be finite and > 0, got {shown(value)}")
    return float(value)


class Link:
    """How bytes travel between two hosts, in each direction: what :meth:`Network.link` sets.

    ``latency`` (seconds, one way), ``jitter`` (up to this much more, drawn per segment or
    datagram from the seed; a stream is never reordered by it), ``loss`` and ``duplicate``
    (probabilities per datagram), ``bandwidth`` (bytes per second, or None: no limit).
    """

    __slots__ = ("bandwidth", "duplicate", "jitter", "latency", "loss", "ticks")

    def __init__(
        self,
        latency: float,
        jitter: float = 0.0,
        loss: float = 0.0,
        duplicate: float = 0.0,
        bandwidth: float | None = None,
    ) -> None:
        self.latency = latency
        self.jitter = jitter
        self.loss = loss
        self.duplicate = duplicate
        self.bandwidth = bandwidth
        self.ticks = round(latency * TICKS_PER_SECOND)

    def delay_ticks(self, world: Network) -> int:
        """One way's delay now, in ticks: the latency, plus a jitter drawn from the seed."""
        if self.jitter:
            return self.ticks + round(world.chooser.uniform(0.0, self.jitter) * TICKS_PER_SECOND)
        return self.ticks

    def __repr__(self) -> str:
        return (
            f"Link(latency={self.latency!r}, jitter={self.jitter!r}, loss={self.loss!r}, "
            f"duplicate={self.duplicate!r}, bandwidth={self.bandwidth!r})"
        )


class HostClock:
    """A host's clock: ``offset`` ahead of the loop's at the anchor, running at ``rate``."""

    __slots__ = ("anchor", "local", "rate")

    def __init__(self, offset: float, rate: float) -> None:
        self.anchor = 0  # loop ticks at the anchor
        self.local = round(offset * TICKS_PER_SECOND)  # host ticks at the anchor
        self.rate = rate

    @property
    def identity(self) -> bool:
        return self.local == self.anchor and self.rate == 1.0

    def ticks(self, ticks: int) -> int:
        """The host's tick count when the loop's is ``ticks``."""
        if self.rate == 1.0:
            return self.local + (ticks - self.anchor)
        return self.local + round((ticks - self.anchor) * self.rate)

    def seconds(self, ticks: int) -> float:
        return self.ticks(ticks) / TICKS_PER_SECOND

    def loop_seconds(self, local_seconds: float) -> float:
        """The loop's time at which this clock reads ``local_seconds``."""
        anchor = self.anchor / TICKS_PER_SECOND
        return anchor + (local_seconds - self.local / TICKS_PER_SECOND) / self.rate


class Driver(Protocol):
    """Where a world's timers and callbacks run: the loop it is attached to."""

    def ticks(self) -> int: ...
    def at(self, ticks: int, callback: Any, context: contextvars.Context, *args: Any) -> Any: ...
    def soon(self, callback: Any, context: contextvars.Context, *args: Any) -> None: ...
    def report(self, context: dict[str, Any]) -> None: ...


class LoopDriver:
    """A world's timers and callbacks on a virtual asyncio loop (its own timer heap)."""

    __slots__ = ("later", "loop")

    def __init__(self, loop: VirtualEventLoop) -> None:
        self.loop = loop
        # The loop's call_later as it is now (the compiled one, when the core is there): the
        # world's timers count the loop's own nanoseconds, whichever host's code arms them,
        # so they never go through the per-host stand-ins a world with host clocks installs.
        self.later: Any = loop.__dict__.get("call_later") or type(loop).call_later.__get__(loop)

    def ticks(self) -> int:
        return self.loop._vt_ticks

    def at(self, ticks: int, callback: Any, context: contextvars.Context, *args: Any) -> Any:
        if self.loop.is_closed():
            return _NOTHING  # a transport closed by the collector after the run: nothing to do
        delay = ticks - self.loop._vt_ticks
        if delay <= 0:
            return self.later(0, callback, *args, context=context)
        # A whole number of nanoseconds, which call_later turns back into exactly that tick.
        return self.later(delay / TICKS_PER_SECOND, callback, *args, context=context)

    def soon(self, callback: Any, context: contextvars.Context, *args: Any) -> None:
        loop = self.loop
        if not loop.is_closed():
            type(loop).call_soon(loop, callback, *args, context=context)

    def report(self, context: dict[str, Any]) -> None:
        self.loop.call_exception_handler(context)


class _Nothing:
    """The handle of a timer that was never set (the loop had closed): cancelling it is fine."""

    def cancel(self) -> None:
        pass

    def cancelled(self) -> bool:
        return True


_NOTHING: Final = _Nothing()


class Unattached:
    """The driver of a world not yet attached to a loop: time 0, nothing can be scheduled."""

    def ticks(self) -> int:
        return 0

    def at(self, ticks: int, callback: Any, context: contextvars.Context, *args: Any) -> Any:
        raise UsageError("the world is not attached to a running loop yet")

    def soon(self, callback: Any, context: contextvars.Context, *args: Any) -> None:
        raise UsageError("the world is not attached to a running loop yet")

    def report(self, context: dict[str, Any]) -> None:
        raise UsageError("the world is not attached to a running loop yet")


class Unset:
    """The default of a :meth:`~virtualtime.net.Network.link` setting: keep its value."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = Unset()

LOOPBACK: Final = Link(0.0)


def is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
