"""Time arithmetic: the one place that decides what a virtual second is.

Why integer ticks
-----------------
Floats do not add up: ``0.1 + 0.1 + 0.1 != 0.3``.  A loop that simply did ``now += delay``
would drift, and two runs that sleep the same total in different pieces would disagree.  So
virtual time is kept as an integer count of **ticks** of one nanosecond
(:data:`TICKS_PER_SECOND`), and converted to a float only when somebody reads it.  Ten sleeps
of 0.1 s are ten additions of 100,000,000 ticks, and the float read at the end is exactly
``1.0``; a hundred years of virtual time is about 3.2e18 ticks, which a Python ``int`` holds
without any loss.

Rules every caller relies on:

* :func:`ticks_at_or_after` turns an absolute deadline into the first tick at or after it,
  so a timer never fires while ``time() < deadline``.
* :func:`to_ticks` rounds to the nearest tick, and :func:`to_seconds` of a tick count is the
  float nearest to its exact decimal value, so ``to_seconds(to_ticks(x)) == x`` for every
  ``x`` that is a whole number of nanoseconds.
* :func:`delay_ticks` turns a relative delay into ticks, and any *positive* delay becomes at
  least one tick: a loop that sleeps 1e-12 s in a ``while`` still moves forward, it never
  freezes time.
* Conversions are monotone: a later float never maps to an earlier tick.

:class:`RateAnchor` is the other half: virtual time that follows real time at a rate, rebased
whenever the rate changes so that a change never makes time jump.  It holds its real clock in
an attribute, so tests can check the arithmetic with a fake clock and no loop at all.

Part of ``shared``: imports nothing of virtualtime's (see tests/layout.py).
"""

from __future__ import annotations

import math
import time as _stdlib_time
from collections.abc import Callable
from fractions import Fraction
from numbers import Real
from typing import Final

from ._errors import InvalidTypeError, InvalidValueError

__all__ = [
    "MAX_RATE",
    "NEVER",
    "RESOLUTION",
    "TICKS_PER_SECOND",
    "RateAnchor",
    "check_bool",
    "check_delay",
    "check_finite",
    "check_rate",
    "delay_ticks",
    "shown",
    "ticks_at_or_after",
    "to_seconds",
    "to_ticks",
]

TICKS_PER_SECOND: Final = 1_000_000_000
"""Virtual time is counted in integer nanoseconds."""

RESOLUTION: Final = 1.0 / TICKS_PER_SECOND
"""The smallest step of virtual time, in seconds."""

NEVER: Final = 1 << 125
"""Tick value of a timer that can never fire (scheduled at +inf); also the horizon of virtual
time: no option or deadline may reach it."""

_real_monotonic = _stdlib_time.monotonic


def to_ticks(seconds: float) -> int:
    """Nearest tick to ``seconds`` (a finite number of seconds)."""
    return round(seconds * TICKS_PER_SECOND)


def ticks_at_or_after(seconds: float) -> int:
    """The first tick whose float time is ``>= seconds`` (an absolute deadline).

    Deadlines computed in floats (``now + 0.2`` three times is ``0.6000000000000001``) must
    not be rounded *down*: code that re-checks ``loop.time() >= deadline`` when its timer
    fires (anyio's cancel scopes do) would otherwise re-arm the timer at the same instant
    for ever.  Usually the nearest tick already qualifies; otherwise the exact value decides.
    """
    ticks = round(seconds * TICKS_PER_SECOND)
    if ticks / TICKS_PER_SECOND >= seconds:
        return ticks
    return math.ceil(Fraction(seconds) * TICKS_PER_SECOND)


def to_seconds(ticks: int) -> float:
    """The float nearest to ``ticks`` nanoseconds, in seconds."""
    return ticks / TICKS_PER_SECOND


def delay_ticks(delay: float) -> int:
    """Ticks for a relative ``delay``: at least one tick when ``delay > 0``, zero otherwise.

    Non-positive and NaN delays mean "as soon as possible", as in :func:`asyncio.sleep`.
    """
    if delay > 0:
        ticks = round(delay * TICKS_PER_SECOND)
        return ticks if ticks > 0 else 1
    return 0


def _type_name(value: object) -> str:
    return type(value).__name__


MAX_RATE: Final = 1e12
"""The fastest rate a clock may run at, relative to what drives it (a trillion to one)."""


def shown(value: object) -> str:
    """``repr(value)`` for an error message, cut short: a 400-digit int is named, not printed.

    (``repr`` of an int past 4,300 digits even raises a ``ValueError`` of its own.)
    """
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 100:
        if value.bit_length() < 13_000:  # str() works (Python's limit is 4,300 digits)
            return f"an int of {len(str(abs(value)))} digits"
        digits = math.floor(value.bit_length() * math.log10(2)) + 1
        return f"an int of about {digits} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_finite(name: str, value: object) -> float:
    """``value`` as a float if it is a finite real number, else a clear error.

    ``TypeError`` for non-numbers (including ``bool``, which is almost always a mistake),
    ``ValueError`` for NaN and infinities.  The message names ``name``.
    """
    if isinstance(value, bool) or not isinstance(value, Real):
        raise InvalidTypeError(
            f"{name} must be a real number, got {shown(value)} ({_type_name(value)})"
        )
    try:
        result = float(value)
    except OverflowError:  # an int beyond any float
        raise InvalidValueError(f"{name} must be finite, got {shown(value)}") from None
    if not math.isfinite(result):
        raise InvalidValueError(f"{name} must be finite, got {shown(value)}")
    return result


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is exactly True or False, else a ``TypeError`` naming ``name``."""
    if not isinstance(value, bool):
        raise InvalidTypeError(f"{name} must be True or False, got {value!r}")
    return value


def check_delay(name: str, value: object) -> float:
    """``value`` as a float if it is a finite number >= 0, else a clear error."""
    result = check_finite(name, value)
    if result < 0:
        raise InvalidValueError(f"{name} must be >= 0, got {shown(value)}")
    return result


def check_rate(name: str, value: object) -> float:
    """A rate: a number from 0 to :data:`MAX_RATE` (0 means stopped or "not tied to real
    time"); a faster one would overflow virtual time within seconds of real time."""
    result = check_delay(name, value)
    if result > MAX_RATE:
        raise InvalidValueError(f"{name} must be at most {MAX_RATE:g}, got {shown(value)}")
    return result


class RateAnchor:
    """Virtual time that runs at ``rate`` times real time, from an anchor.

    ``virtual(real) = anchor_virtual + (real - anchor_real) * rate``.  Changing the rate first
    re-anchors at the present instant, so the virtual time read just before and just after a
    change is the same: a rate change never jumps time forwards or backwards.  ``clock`` is the
    real clock (``time.monotonic`` by default); pass a fake one to test the arithmetic.
    """

    __slots__ = ("_anchor_real", "_anchor_virtual", "_rate", "clock")

    def __init__(
        self,
        virtual: float,
        rate: float,
        clock: Callable[[], float] = _real_monotonic,
    ) -> None:
        self.clock = clock
        self._anchor_real = clock()
        self._anchor_virtual = virtual
        self._rate = check_rate("rate", rate)

    @property
    def rate(self) -> float:
        """Virtual seconds per real second."""
        return self._rate

    def set_rate(self, rate: float) -> None:
        """Change the rate from now on, without moving the current virtual time."""
        rate = check_rate("rate", rate)
        self.rebase(self.virtual())
        self._rate = rate

    def rebase(self, virtual: float) -> None:
        """Declare that the current real instant corresponds to ``virtual``."""
        self._anchor_real = self.clock()
        self._anchor_virtual = virtual

    def virtual(self) -> float:
        """The virtual time now, according to the real clock."""
        return self._anchor_virtual + (self.clock() - self._anchor_real) * self._rate

    def real_until(self, virtual: float) -> float:
        """Real seconds from now until the virtual time reaches ``virtual`` (inf if rate 0)."""
        if self._rate == 0:
            return math.inf
        return max(0.0, (virtual - self.virtual()) / self._rate)

    def __repr__(self) -> str:
        return f"RateAnchor(virtual={self.virtual()!r}, rate={self._rate!r})"
