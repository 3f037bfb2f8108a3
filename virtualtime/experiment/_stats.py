"""t-based confidence intervals (the one place scipy is touched)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from .._shared._errors import InvalidTypeError, InvalidValueError


def _check_confidence(confidence: float) -> float:
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)):
        raise InvalidTypeError(f"confidence must be a number in (0, 1), got {confidence!r}")
    if not 0.0 < confidence < 1.0:
        raise InvalidValueError(f"confidence must be in (0, 1), got {confidence!r}")
    return float(confidence)


@lru_cache(maxsize=4096)
def t_quantile(confidence: float, df: int) -> float:
    """The two-sided t critical value: ``t.ppf((1 + confidence) / 2, df)``."""
    from scipy import stats

    return float(stats.t.ppf((1.0 + confidence) / 2.0, df))


def interval(values: Sequence[float] | np.ndarray, confidence: float) -> tuple[float, float, float]:
    """Mean, sample standard deviation and t half-width of ``values`` (nan below 2 values)."""
    data = np.asarray(values, dtype=np.float64)
    n = int(data.size)
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = float(np.mean(data))
    if n < 2:
        return mean, math.nan, math.nan
    std = float(np.std(data, ddof=1))
    return mean, std, t_quantile(confidence, n - 1) * std / math.sqrt(n)
