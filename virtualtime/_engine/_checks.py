"""The loop's checks of time arguments, and the horizon of virtual time.

How ``call_at``/``call_later`` read a number of seconds (:func:`_seconds`: any real number,
``inf`` included; ``None``, strings and NaN refused at once, naming the argument) and how the
driving verbs read a span (:func:`_check_span`: finite, >= 0, short of the horizon).  The
horizon (:data:`_HORIZON`) is where a timer becomes a timer at infinity.

Part of ``engine``: may import ``shared``, ``clocks``, ``options`` (see tests/layout.py).
"""

from __future__ import annotations

from numbers import Real
from typing import Final

from .._shared._errors import InvalidTypeError, InvalidValueError
from .._shared._time import TICKS_PER_SECOND, check_delay, shown, to_ticks
from ._timers import NEVER

__all__: list[str] = []

_NEVER: Final = NEVER
_HORIZON: Final = NEVER / TICKS_PER_SECOND
"""The horizon of virtual time, in seconds (2**125 ns, about 4.25e28 s or 1.3e21 years).

A timer at or beyond it is a timer at infinity: accepted, like a stock loop accepts
``asyncio.sleep(1e300)``, and never fired.  The clock itself never reaches it."""

_FAR: Final = 1e18
"""Longest delay (seconds) the inline path of ``call_later`` takes without the full checks."""

_short: Final = shown  # repr for a message: a 400-digit int is named, not printed


def _seconds(name: str, value: object) -> float:
    """A time argument of ``call_at``/``call_later`` as a float, or an error naming it.

    Accepts what a stock loop accepts in practice (any real number; ``inf`` included);
    refuses ``None``, strings, lists and other non-numbers at once with a ``TypeError``, NaN
    with a ``ValueError``, and an int too large for any float with a ``ValueError`` rather
    than the stock ``OverflowError``.
    """
    if type(value) is float:
        seconds = value
    elif value is None:
        raise InvalidTypeError(f"{name} cannot be None")
    elif not isinstance(value, Real):
        raise InvalidTypeError(
            f"{name} must be a number of seconds (an int or a float), got {_short(value)} "
            f"({type(value).__name__})"
        )
    else:
        try:
            seconds = float(value)
        except OverflowError:
            raise InvalidValueError(
                f"{name} is too large for a time: {_short(value)} is beyond any float "
                "(use math.inf to wait for ever)"
            ) from None
    if seconds != seconds:
        raise InvalidValueError(f"{name} must not be NaN, got {value!r}")
    return seconds


def _check_span(name: str, value: object, now: int) -> int:
    """Ticks of a driving verb's span ``value`` (>= 0) from tick ``now``, below the horizon."""
    span = check_delay(name, value)
    if span < _HORIZON:
        ticks = to_ticks(span)
        if now + ticks < _NEVER:
            return ticks
    raise InvalidValueError(
        f"{name} would take virtual time past its horizon ({_HORIZON:.4g} s): got {_short(value)}"
    )
