"""Statistics a modeller would otherwise hand-write: time-weighted levels and tallies.

Two kinds of record, as in salabim's monitors and KSL's statistics:

* :class:`TimeSeries` -- a level that holds between changes (queue length, users, stock).
  Its mean is weighted by how long each value held (``∫ level dt / T``).
* :class:`Tally` -- one number per observation (a waiting time), each stamped with the
  instant it was observed.

Both keep their whole history, so any window can be asked for after the run: pass
``start=`` (the end of a warm-up period) and/or ``end=``; by default the window is the whole
run up to :attr:`TimeSeries.now` (the simulation's current or final time).  Deleting a
warm-up this way never needs a decision before the run.

Part of ``sim``: may import ``shared``, ``engine``, ``trace``, ``api`` (see tests/layout.py).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass

from .._shared._errors import InvalidTypeError, InvalidValueError
from ._check import check_number

__all__ = ["Summary", "Tally", "TimeSeries"]


@dataclass(frozen=True, slots=True)
class Summary:
    """Count, mean, sample standard deviation, minimum and maximum of some observations.

    With no observations every field but ``count`` is ``nan``; with one, ``stdev`` is ``nan``.
    """

    count: int
    mean: float
    stdev: float
    minimum: float
    maximum: float


def _window(start: float | None, end: float | None, now: float) -> tuple[float, float]:
    """A window ``[start, end]``: each bound None (the whole run) or a finite number."""
    lo = -math.inf if start is None else check_number("start", start)
    hi = now if end is None else check_number("end", end)
    if hi < lo:
        raise InvalidValueError(f"end must not be before start={start!r}, got end={end!r}")
    return lo, hi


class TimeSeries:
    """A piecewise-constant level over time, with time-weighted statistics over any window.

    A resource keeps one for its queue length and one for its users; a container for its
    level; a store for its number of items.  :meth:`mean` is the time average (the
    utilisation of a one-server resource is ``users.mean()``); :meth:`maximum`,
    :meth:`minimum` and :meth:`value_at` answer the other usual questions.
    """

    __slots__ = ("_clock", "_times", "_values")

    def __init__(self, clock: Callable[[], float], initial: float = 0.0, start: float = 0.0):
        if not callable(clock):
            raise InvalidTypeError(
                f"clock must be callable as clock() -> float, got {clock!r} "
                f"({type(clock).__name__})"
            )
        check_number("initial", initial)
        check_number("start", start)
        self._clock = clock
        self._times: list[float] = [start]
        self._values: list[float] = [initial]

    def record(self, value: float) -> None:
        """The level is ``value`` (a finite number) from now on."""
        if type(value) is not float or not -math.inf < value < math.inf:
            check_number("value", value)
        self._record_at(self._clock(), value)

    def _record_at(self, now: float, value: float) -> None:
        times = self._times
        if times[-1] == now:
            self._values[-1] = value
        elif self._values[-1] != value:  # a level that did not change needs no record
            times.append(now)
            self._values.append(value)

    @property
    def now(self) -> float:
        """The instant statistics run up to by default (the simulation's time)."""
        return self._clock()

    @property
    def value(self) -> float:
        """The current level."""
        return self._values[-1]

    @property
    def start(self) -> float:
        """When recording began."""
        return self._times[0]

    def value_at(self, t: float) -> float:
        """The level at instant ``t`` (the last value recorded at or before it)."""
        check_number("t", t)
        index = bisect.bisect_right(self._times, t) - 1
        if index < 0:
            raise InvalidValueError(f"t={t!r} is before recording began at {self._times[0]!r}")
        return self._values[index]

    def _pieces(self, start: float | None, end: float | None) -> list[tuple[float, float]]:
        """``(duration, value)`` pieces inside the window."""
        lo, hi = _window(start, end, self._clock())
        lo = max(lo, self._times[0])
        times, values = self._times, self._values
        pieces: list[tuple[float, float]] = []
        first = max(bisect.bisect_right(times, lo) - 1, 0)
        for index in range(first, len(times)):
            t0 = max(times[index], lo)
            t1 = min(times[index + 1], hi) if index + 1 < len(times) else hi
            if t1 > t0:
                pieces.append((t1 - t0, values[index]))
            if index + 1 < len(times) and times[index + 1] >= hi:
                break
        return pieces

    def mean(self, start: float | None = None, end: float | None = None) -> float:
        """Time-weighted mean over ``[start, end]`` (nan for an empty window)."""
        pieces = self._pieces(start, end)
        total = math.fsum(d for d, _ in pieces)
        if total <= 0:
            return math.nan
        return math.fsum(d * v for d, v in pieces) / total

    def maximum(self, start: float | None = None, end: float | None = None) -> float:
        """Largest level held for a positive time in the window (nan if empty)."""
        pieces = self._pieces(start, end)
        return max((v for _, v in pieces), default=math.nan)

    def minimum(self, start: float | None = None, end: float | None = None) -> float:
        """Smallest level held for a positive time in the window (nan if empty)."""
        pieces = self._pieces(start, end)
        return min((v for _, v in pieces), default=math.nan)

    def __repr__(self) -> str:
        return f"<TimeSeries value={self.value!r} changes={len(self._times)}>"


class Tally:
    """Observations stamped with the instant they were made (waiting times, for instance).

    :meth:`summary` gives count, mean, standard deviation, minimum and maximum of the
    observations made inside a window -- pass ``start=`` to delete a warm-up period.
    """

    __slots__ = ("_times", "_values")

    def __init__(self) -> None:
        self._times: list[float] = []
        self._values: list[float] = []

    def add(self, t: float, value: float) -> None:
        """Record ``value`` observed at instant ``t`` (both finite numbers; instants never go
        backwards)."""
        # The resources add one observation per customer: two finite floats pass at a glance.
        if type(t) is not float or not -math.inf < t < math.inf:
            check_number("t", t)
        if type(value) is not float or not -math.inf < value < math.inf:
            check_number("value", value)
        times = self._times
        if times and t < times[-1]:
            raise InvalidValueError(
                f"t must not be before the last observation at {times[-1]!r}, got {t!r} "
                "(instants never go backwards)"
            )
        self._times.append(t)
        self._values.append(value)

    def values(self, start: float | None = None, end: float | None = None) -> list[float]:
        """The observations made in ``[start, end]`` (a new list)."""
        if start is None and end is None:
            return list(self._values)
        lo, hi = _window(start, end, math.inf)
        i = bisect.bisect_left(self._times, lo)
        j = bisect.bisect_right(self._times, hi)
        return self._values[i:j]

    def count(self, start: float | None = None, end: float | None = None) -> int:
        """How many observations were made in the window."""
        return len(self.values(start, end))

    def mean(self, start: float | None = None, end: float | None = None) -> float:
        """Mean of the observations in the window (nan if there are none)."""
        values = self.values(start, end)
        return math.fsum(values) / len(values) if values else math.nan

    def summary(self, start: float | None = None, end: float | None = None) -> Summary:
        """:class:`Summary` of the observations in the window."""
        values = self.values(start, end)
        n = len(values)
        if not n:
            return Summary(0, math.nan, math.nan, math.nan, math.nan)
        mean = math.fsum(values) / n
        stdev = (
            math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else math.nan
        )
        return Summary(n, mean, stdev, min(values), max(values))

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"<Tally count={len(self._values)}>"
