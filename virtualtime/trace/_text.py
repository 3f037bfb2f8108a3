"""How values are shown in the words a trace writes: error messages and span names.

A trace reads values its caller chose (a row name, a category, a place), so every message
that quotes one cuts it short (:func:`_shown`), and span names round the floats in a value to
a few decimals (:func:`_short_repr`).  Every module of the package, and the simulation
toolkit's journeys, name values through here.

Part of ``trace``: may import ``shared``, ``engine`` (see tests/layout.py).
"""

from __future__ import annotations

import re
from typing import Final


def _shown(value: object, limit: int = 60) -> str:
    """``repr(value)`` for an error message, cut short: a hostile value must not flood it."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 1]}… ({len(text):,} characters)"


_FLOAT: Final = re.compile(r"(?<![\w.])-?\d+\.\d+(?:e[-+]?\d+)?(?![\w.])")


def _short_repr(value: object) -> str:
    """``repr(value)`` with every float in it rounded to 3 decimals, to name a span.

    A place such as ``(3.3333333333333335, 2.3333333333333335)`` reads ``(3.333, 2.333)``
    (a number that would round to 0 keeps 3 significant digits instead); the exact value
    belongs in the span's arguments.  The simulation toolkit names journeys with it.
    """

    def rounded(match: re.Match[str]) -> str:
        number = float(match.group(0))
        short = repr(round(number, 3))
        if number and not round(number, 3):
            short = f"{number:.3g}"
        return short if len(short) < len(match.group(0)) else match.group(0)

    return _FLOAT.sub(rounded, repr(value))
