"""Argument checks the simulation kit shares: one rule, one message style, one error family.

Every public callable of :mod:`virtualtime.sim` checks its arguments before it changes
anything, and refuses a bad one with :class:`~virtualtime.InvalidTypeError` (wrong type) or
:class:`~virtualtime.InvalidValueError` (right type, value outside the rule) whose message
names the argument, the rule and the value -- as the loop's own checks do.  Numbers too large
for a float (``10**400``) and finite numbers past the horizon of virtual time (``1e308``
seconds) are refused by name as well, never left to surface as an ``OverflowError`` from deep
inside.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Final

from .._shared._errors import InvalidTypeError, InvalidValueError
from .._shared._time import NEVER, TICKS_PER_SECOND, shown, to_ticks

__all__ = [
    "HORIZON",
    "check_count",
    "check_instant",
    "check_name",
    "check_number",
    "check_positive",
    "check_span",
    "instant_ticks",
    "span_ticks",
    "short",
]

HORIZON: Final = NEVER / TICKS_PER_SECOND
"""The horizon of virtual time, in seconds (about 4.25e28): no instant may reach it."""


short: Final = shown
"""``repr(value)`` for a message, cut short: a 400-digit int is named, not printed."""


def _real(name: str, value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise InvalidTypeError(
            f"{name} must be {what}, got {short(value)} ({type(value).__name__})"
        )
    try:
        number = float(value)
    except OverflowError:  # an int beyond any float
        raise InvalidValueError(
            f"{name} must be {what}; {short(value)} is too large for any float"
        ) from None
    if number != number:
        raise InvalidValueError(f"{name} must be {what}, got nan")
    return number


def check_number(name: str, value: object, *, allow_inf: bool = False) -> float:
    """A real number (not bool, not NaN; finite unless ``allow_inf``) as a float."""
    what = "a real number" if allow_inf else "a finite real number"
    number = _real(name, value, what)
    if not allow_inf and math.isinf(number):
        raise InvalidValueError(f"{name} must be {what}, got {short(value)}")
    return number


def check_positive(
    name: str, value: object, *, allow_inf: bool = False, zero: bool = False
) -> float:
    """A number > 0 (>= 0 with ``zero``), finite unless ``allow_inf``, as a float."""
    rule = ">= 0" if zero else "> 0"
    what = f"a real number {rule}" if allow_inf else f"a finite real number {rule}"
    number = _real(name, value, what)
    if (number < 0 if zero else number <= 0) or (not allow_inf and math.isinf(number)):
        raise InvalidValueError(f"{name} must be {what}, got {short(value)}")
    return number


def check_instant(name: str, value: object) -> float:
    """An instant of virtual time: a finite number before the horizon (``HORIZON``)."""
    number = _real(name, value, "a finite number of virtual seconds")
    if math.isinf(number) or abs(number) >= HORIZON:
        raise InvalidValueError(
            f"{name} must be a finite number of virtual seconds before the horizon of virtual "
            f"time ({HORIZON:.4g} s), got {short(value)}"
        )
    return number


def check_count(name: str, value: object, *, minimum: int = 0) -> int:
    """An int (not bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError(
            f"{name} must be an int >= {minimum}, got {short(value)} ({type(value).__name__})"
        )
    if value < minimum:
        raise InvalidValueError(f"{name} must be an int >= {minimum}, got {short(value)}")
    return value


def check_name(name: str, value: object) -> str | None:
    """A label: a str or None."""
    if value is not None and not isinstance(value, str):
        raise InvalidTypeError(
            f"{name} must be a str or None, got {short(value)} ({type(value).__name__})"
        )
    return value


def check_span(name: str, value: object) -> float:
    """A span of virtual time: a finite number >= 0 that stays before the horizon."""
    number = _real(name, value, "a finite number of virtual seconds >= 0")
    if not 0 <= number < HORIZON:
        raise InvalidValueError(
            f"{name} must be a finite number of virtual seconds >= 0 before the horizon of "
            f"virtual time ({HORIZON:.4g} s), got {short(value)}"
        )
    return number


def instant_ticks(name: str, value: object) -> int:
    """:func:`check_instant`, in ticks."""
    return to_ticks(check_instant(name, value))


def span_ticks(name: str, value: object) -> int:
    """:func:`check_span`, in ticks (rounded to the nearest)."""
    return to_ticks(check_span(name, value))
