"""t-based confidence intervals (the one place scipy is touched).

Part of ``experiment``: may import ``shared``, ``options``, ``engine``, ``trio``, ``trace``,
``api``, ``sim`` (see tests/layout.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from numbers import Real

import numpy as np

from .._shared._errors import InvalidTypeError, InvalidValueError
from .._shared._time import shown


def _check_confidence(confidence: object) -> float:
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)):
        raise InvalidTypeError(f"confidence must be a number in (0, 1), got {confidence!r:.60}")
    if not 0.0 < confidence < 1.0:
        raise InvalidValueError(f"confidence must be in (0, 1), got {confidence!r}")
    return float(confidence)


@lru_cache(maxsize=4096)
def t_quantile(confidence: float, df: int) -> float:
    """The two-sided t critical value: ``t.ppf((1 + confidence) / 2, df)``."""
    from scipy import stats

    return float(stats.t.ppf((1.0 + confidence) / 2.0, df))


def interval(values: Sequence[float] | np.ndarray, confidence: float) -> tuple[float, float, float]:
    """Mean, sample standard deviation and t half-width of ``values`` (nan below 2 values).

    Use it for an interval of numbers you collected yourself, at the ``confidence`` level
    (a number in (0, 1)); :meth:`Results.summary` uses it for every output.  ``values`` is a
    flat sequence (or 1-D array) of real numbers; a NaN among them makes every result NaN.
    """
    level = _check_confidence(confidence)
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
        raise InvalidTypeError(f"values must be a sequence of numbers, got {type(values).__name__}")
    if not isinstance(values, np.ndarray):
        items: Sequence[object] = values  # what a caller may really pass
        for item in items:  # numpy would read "0" as 0.0 and True as 1.0: neither is a number
            if isinstance(item, bool) or not isinstance(item, Real):
                raise InvalidTypeError(
                    f"values must be real numbers, got {shown(item)} ({type(item).__name__}) "
                    "among them"
                )
    elif values.dtype.kind not in "iuf":
        raise InvalidTypeError(f"values must be real numbers, got an array of {values.dtype}")
    try:
        data = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as error:
        raise InvalidTypeError(f"values must be real numbers ({error})") from None
    if data.ndim != 1:
        raise InvalidValueError(f"values must be flat (one dimension), got {data.ndim} dimensions")
    confidence = level
    n = int(data.size)
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = float(np.mean(data))
    if n < 2:
        return mean, math.nan, math.nan
    std = float(np.std(data, ddof=1))
    return mean, std, t_quantile(confidence, n - 1) * std / math.sqrt(n)
