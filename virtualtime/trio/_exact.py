"""Exact time on trio: float deadlines turned into whole ticks, and the horizon of virtual time.

The :class:`~virtualtime.trio.VirtualClock` keeps time as integer ticks
(:mod:`virtualtime._shared._time`), but trio hands it absolute float deadlines computed as
``now + delay``, which carry a few ulps of rounding noise.  This module owns the arithmetic that
recovers the delay a program meant from such a deadline (:func:`ticks_until`, with the carried
remainder that keeps long runs unbiased), the noise margins the clock's fast path relies on,
and the horizon no jump or driving verb may pass (:func:`span_ticks`).  The package
documentation ("Exact time") tells the story; nothing here imports trio.

Part of ``trio``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

import math
import typing

from .._shared import _errors, _time

__all__ = [
    "FINE_LIMIT",
    "FINE_NOISE",
    "HORIZON",
    "NOISE_ULPS",
    "beyond_horizon",
    "span_ticks",
    "ticks_until",
]

NOISE_ULPS: typing.Final = 8
"""A deadline this many float ulps above a tick is float noise, not a later instant."""

FINE_LIMIT: typing.Final = 2.0**18
"""Below this many seconds (about three days) floats are fine enough that the float
noise of a deadline stays below :data:`FINE_NOISE` and the jump's fast path applies."""

FINE_NOISE: typing.Final = NOISE_ULPS * math.ulp(FINE_LIMIT) * _time.TICKS_PER_SECOND
"""The largest float noise, in ticks, of a deadline below :data:`FINE_LIMIT`."""

_ROUND_MARGIN: typing.Final = 100
"""Where floats are coarser than a tick, a round decimal delay is believed only if it is this
many times rounder than the width of the noise window (a chance match is then < 1 %)."""

HORIZON: typing.Final = _time.NEVER / _time.TICKS_PER_SECOND
"""The horizon of virtual time, in seconds (2**125 ns, about 4.25e28 s), as on the asyncio loop:
no driving verb and no :meth:`VirtualClock.jump` may take the clock there.  (A trio deadline
beyond it still fires when it is the next one: ``trio.sleep(1e300)`` is one jump.)"""


def ticks_until(deadline: float, now: float, residue: float) -> tuple[int, float]:
    """Whole ticks from the reported time ``now`` to a float ``deadline`` (> ``now``).

    Returns ``(ticks, new residue)``.  trio computes deadlines as ``now + delay`` in floats,
    so a deadline carries a few ulps of rounding noise; the delay is recovered as
    ``deadline - now`` and turned into ticks:

    * where floats are finer than a tick (the first weeks of virtual time), the delay is
      rounded to the nearest tick and the remainder carried to the next delay, so a long run
      of ``sleep(1/3)`` drifts neither up nor down, and float noise below a tick (``0.3 -
      0.2``) never adds a tick: ten ``sleep(0.1)`` are exactly one second;
    * where floats are coarser than a tick (about 3.7 ns per ulp after a year), the round
      decimal delay the program meant (``0.1`` rather than ``0.100000003``) is taken when
      one is clearly rounder than chance would give; otherwise the float delay is all there
      is, and the carried remainder keeps its rounding unbiased.

    A positive delay shorter than a tick still advances one tick (time never freezes), unless
    it is float noise: two tasks' deadlines for one instant, spelled differently
    (``0.1 + 0.2`` and ``0.3``), are the same instant.
    """
    delay = deadline - now
    scaled = delay * _time.TICKS_PER_SECOND
    if not scaled < 2.0**53:
        # A delay of more than ~104 days: whole ticks of the float are all there is.
        if math.isfinite(scaled):
            return int(scaled), residue
        return int(delay) * _time.TICKS_PER_SECOND, residue
    noise = NOISE_ULPS * math.ulp(deadline) * _time.TICKS_PER_SECOND
    if noise >= 0.5:
        low = max(1, math.ceil(scaled - noise))
        high = math.floor(scaled + noise)
        if low <= high:
            roundest = _roundest(low, high)
            if roundest[1] >= _ROUND_MARGIN * (high - low + 1):
                return roundest[0], residue
    if scaled <= noise:
        return 0, residue  # float noise between two spellings of one instant: no time passes
    exact = scaled + residue
    ticks = round(exact)
    if ticks < 1:
        return 1, max(exact - 1, -0.5)
    return ticks, exact - ticks


def _roundest(low: int, high: int) -> tuple[int, int]:
    """``(n, step)``: a number in ``[low, high]`` that is a multiple of the largest power of
    ten ``step`` that has one there (the middle one of several)."""
    step = 10 ** len(str(high))
    while step > 1:
        step //= 10
        first = -(-low // step) * step
        if first <= high:
            last = high // step * step
            return first + (last - first) // step // 2 * step, step
    return low, 1  # pragma: no cover - every integer is a multiple of 1


def span_ticks(name: str, value: object, now: int) -> int:
    """Ticks of a span ``value`` (finite, >= 0) from tick ``now``, short of the horizon; else
    the error naming ``name`` (the asyncio loop's rule and words)."""
    span = _time.check_delay(name, value)
    if span < HORIZON:
        ticks = _time.delay_ticks(span)
        if now + ticks < _time.NEVER:
            return ticks
    raise beyond_horizon(name, value)


def beyond_horizon(name: str, value: object) -> _errors.InvalidValueError:
    if isinstance(value, int) and value.bit_length() > 200:  # repr() may even refuse it
        shown = f"an int of about {value.bit_length() * 30103 // 100000 + 1} digits"
    else:
        shown = repr(value)
    return _errors.InvalidValueError(
        f"{name} would take virtual time past its horizon ({HORIZON:.4g} s): got {shown}"
    )
