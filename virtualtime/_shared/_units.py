"""Durations for people: ``"90s"``, ``"1h30m"`` in, ``"1 d 2 h"`` out; counts on a command line.

Shared by the command line (``--until``, ``--start``, ``--seeds``) and the pytest plugin
(``max_time``, ``--virtualtime-seeds``), so both read the same forms.  Time arithmetic
proper (ticks, exact sums) lives in ``_time``.

Part of ``shared``: imports nothing of virtualtime's (see tests/layout.py).
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from typing import Final

from ._errors import InvalidTypeError, InvalidValueError

__all__ = ["count_arg", "format_duration", "parse_time"]


def count_arg(minimum: int) -> Callable[[str], int]:
    """An argparse ``type=``: a whole number at least ``minimum``, or a message saying so."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return value

    return parse


_UNITS: Final = {
    "": 1.0,
    "s": 1.0,
    "sec": 1.0,
    "ms": 1e-3,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 7 * 86400.0,
}
_DURATION_PART: Final = re.compile(
    r"\s*(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)\s*(ms|sec|min|s|m|h|d|w)?",
    re.IGNORECASE,
)


def parse_time(text: str) -> float:
    """Seconds from ``"3600"``, ``"90s"``, ``"15m"``, ``"36h"``, ``"2d"`` or ``"1h30m"``.

    Raises ``ValueError`` naming the text and the accepted forms.  The result is finite and
    >= 0; a bare number is seconds.
    """
    if not isinstance(text, str):
        raise InvalidTypeError(f"expected a string, got {text!r}")
    spec = text.strip()
    total = 0.0
    pos = 0
    parts = 0
    while pos < len(spec):
        match = _DURATION_PART.match(spec, pos)
        if match is None or match.end() == pos:
            break
        number, unit = match.groups()
        if unit is None and (parts or match.end() < len(spec)):
            break  # a bare number must be the whole text
        total += float(number) * _UNITS[(unit or "").lower()]
        pos = match.end()
        parts += 1
    if not spec or parts == 0 or pos != len(spec) or not math.isfinite(total):
        raise InvalidValueError(
            f"expected seconds (3600) or a duration (90s, 15m, 36h, 2d, 1h30m), got {text!r}"
        )
    return total


def format_duration(seconds: float) -> str:
    """A span of virtual time for people: ``1.5 s``, ``12 min 30 s``, ``1 d 2 h``."""
    if seconds < 60:
        return f"{seconds:.4g} s"
    whole = round(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{minutes} min {secs} s" if secs else f"{minutes} min"
