"""An experiment's results: the replication table, summaries, paired differences, files.

Part of ``experiment``: may import ``shared``, ``options``, ``engine``, ``trio``, ``trace``,
``api``, ``sim`` (see tests/layout.py).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .._shared._errors import InvalidTypeError, InvalidValueError
from ._model import Model, ModelRef, run_one, shown
from ._stats import _check_confidence, interval

__all__ = ["Difference", "Failure", "Results", "Summary"]

#: Columns of the replication table besides the parameters and outputs.
KEY_COLUMNS = ("scenario", "replication", "seed", "stream")
TAIL_COLUMNS = ("end_time", "wall_seconds")


@dataclass(frozen=True)
class Summary:
    """One output of one scenario: n, mean, standard deviation and its t-interval."""

    scenario: int
    params: Mapping[str, Any]
    output: str
    n: int
    mean: float
    std: float
    half_width: float
    confidence: float

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width

    def contains(self, value: float) -> bool:
        """Whether ``value`` lies inside the interval (False when there is none yet)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidTypeError(f"value must be a number, got {shown(value)}")
        return bool(self.low <= value <= self.high)


@dataclass(frozen=True)
class Difference:
    """Scenario minus baseline for one output, paired by replication index."""

    scenario: int
    baseline: int
    params: Mapping[str, Any]
    output: str
    n: int
    mean: float
    std: float
    half_width: float
    confidence: float

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width

    @property
    def significant(self) -> bool:
        """Whether the interval excludes zero."""
        return bool(self.low > 0.0 or self.high < 0.0)


@dataclass(frozen=True)
class Failure:
    """A replication that raised: where it was, its random stream, and the traceback.

    ``failure.rerun(model)`` runs exactly that replication again in this process and lets
    its exception out, so you can debug it alone.
    """

    scenario: int
    params: Mapping[str, Any]
    replication: int
    seed: int
    stream: str
    error: str
    traceback: str
    worker: str = ""

    def rerun(self, model: Model | str | ModelRef) -> dict[str, float]:
        """Run this replication again, here; returns its outputs or raises its exception."""
        return run_one(model, self.params, seed=self.seed, stream=self.stream)


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as error:
        raise ImportError(
            "this needs pandas: pip install 'async-virtualtime[experiment]'"
        ) from error
    return pandas


def _have_pandas() -> bool:
    try:
        import pandas  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass
class Results:
    """What an experiment produced: one row per finished replication, and its failures.

    Rows are ordered by scenario, then replication, whatever order they finished in, so the
    same seed gives the same table on any executor (the ``wall_seconds`` column, real cost,
    is the only one that varies).  Use :meth:`table` for the rows (a pandas DataFrame when
    pandas is installed), :meth:`summary` for intervals, :meth:`differences` to compare
    scenarios with a baseline, :meth:`write` for Parquet or CSV.
    """

    scenarios: list[dict[str, Any]]
    parameters: list[str]
    rows: list[dict[str, Any]]
    failures: list[Failure]
    seed: int
    crn: bool
    confidence: float
    executor: str = "serial"
    interrupted: bool = False
    #: Replications attempted per scenario (successes and failures).
    attempted: list[int] = field(default_factory=list)
    #: For the sequential rule: whether each scenario met its half-width target (else None).
    target_met: list[bool] | None = None
    baseline: int = 0

    @property
    def outputs(self) -> list[str]:
        """Output names, in the order the first replication returned them."""
        names: dict[str, None] = {}
        for row in self.rows:
            for name in row["_outputs"]:
                names.setdefault(name, None)
        return list(names)

    @property
    def columns(self) -> list[str]:
        return [
            "scenario",
            *self.parameters,
            "replication",
            "seed",
            "stream",
            *self.outputs,
            *TAIL_COLUMNS,
        ]

    def records(self) -> list[dict[str, Any]]:
        """The table as plain dicts, one per replication (no pandas needed)."""
        columns = self.columns
        return [{c: row.get(c, math.nan) for c in columns} for row in self.rows]

    def table(self) -> Any:
        """The table: a pandas DataFrame if pandas is installed, else :meth:`records`."""
        if not _have_pandas():
            return self.records()
        return self.to_pandas()

    def to_pandas(self) -> Any:
        pandas = _pandas()
        return pandas.DataFrame.from_records(self.records(), columns=self.columns)

    def values(self, output: str, scenario: int = 0) -> list[float]:
        """One output's values in one scenario, in replication order."""
        if not isinstance(output, str) or output not in self.outputs:
            raise InvalidValueError(
                f"output: no output {shown(output)}; outputs are {self.outputs}"
            )
        if isinstance(scenario, bool) or not isinstance(scenario, int):
            raise InvalidTypeError(f"scenario must be a scenario index, got {shown(scenario)}")
        self._scenario_index(scenario, "scenario")
        return [row[output] for row in self.rows if row["scenario"] == scenario]

    def summary(self, confidence: float | None = None) -> list[Summary]:
        """n, mean, standard deviation and t half-width per scenario and output."""
        level = self.confidence if confidence is None else _check_confidence(confidence)
        out: list[Summary] = []
        for index, params in enumerate(self.scenarios):
            rows = [row for row in self.rows if row["scenario"] == index]
            for name in self.outputs:
                data = [row[name] for row in rows if name in row]
                mean, std, half = interval(data, level)
                out.append(Summary(index, params, name, len(data), mean, std, half, level))
        return out

    def differences(
        self, baseline: int | Mapping[str, Any] | None = None, confidence: float | None = None
    ) -> list[Difference]:
        """Each scenario minus ``baseline`` (an index or its parameters), paired by replication.

        With common random numbers (the default) replication *i* of both scenarios saw the
        same random stream, so the paired difference has a smaller variance than the two
        means' intervals suggest.  Only replications that succeeded in both are paired.
        """
        level = self.confidence if confidence is None else _check_confidence(confidence)
        base = self._scenario_index(self.baseline if baseline is None else baseline)
        by_key = {(row["scenario"], row["replication"]): row for row in self.rows}
        out: list[Difference] = []
        for index, params in enumerate(self.scenarios):
            if index == base:
                continue
            reps = sorted(r for s, r in by_key if s == index and (base, r) in by_key)
            for name in self.outputs:
                data = [by_key[index, r][name] - by_key[base, r][name] for r in reps]
                mean, std, half = interval(data, level)
                out.append(Difference(index, base, params, name, len(data), mean, std, half, level))
        return out

    def _scenario_index(self, which: int | Mapping[str, Any], label: str = "baseline") -> int:
        if isinstance(which, Mapping):
            for index, params in enumerate(self.scenarios):
                if dict(params) == dict(which):
                    return index
            raise InvalidValueError(f"{label}: no scenario has the parameters {shown(dict(which))}")
        if isinstance(which, bool) or not isinstance(which, int):
            raise InvalidTypeError(
                f"{label} must be a scenario index or its parameters, got {shown(which)}"
            )
        if not 0 <= which < len(self.scenarios):
            raise InvalidValueError(
                f"{label} {shown(which)} is not a scenario index (0..{len(self.scenarios) - 1})"
            )
        return which

    def summary_table(self, confidence: float | None = None) -> Any:
        """:meth:`summary` as a DataFrame (or records), one row per scenario and output."""
        records = []
        for s in self.summary(confidence):
            records.append(
                {
                    "scenario": s.scenario,
                    **s.params,
                    "output": s.output,
                    "n": s.n,
                    "mean": s.mean,
                    "std": s.std,
                    "half_width": s.half_width,
                    "low": s.low,
                    "high": s.high,
                }
            )
        return _pandas().DataFrame.from_records(records) if _have_pandas() else records

    def failures_table(self) -> list[dict[str, Any]]:
        return [asdict(f) for f in self.failures]

    def write(self, path: str | Path) -> Path:
        """Write the replication table to ``.parquet`` (needs pandas and pyarrow) or ``.csv``."""
        if not isinstance(path, (str, Path)):
            raise InvalidTypeError(f"path must be a str or a Path, got {shown(path)}")
        target = Path(path)
        suffix = target.suffix.lower()
        if suffix == ".csv":
            with target.open("w", newline="", encoding="utf-8") as handle:
                writer = csv.DictWriter(handle, fieldnames=self.columns)
                writer.writeheader()
                for record in self.records():
                    writer.writerow({k: _csv_value(v) for k, v in record.items()})
            return target
        if suffix in (".parquet", ".pq"):
            frame = self.to_pandas()
            try:
                import pyarrow  # noqa: F401
            except ImportError as error:
                raise ImportError(
                    "writing Parquet needs pyarrow: pip install 'async-virtualtime[experiment]'"
                ) from error
            frame.to_parquet(target, index=False)
            return target
        raise InvalidValueError(
            f"path: results are written to .parquet or .csv, got {shown(str(path))}"
        )

    def plot(
        self,
        path: str | Path,
        *,
        title: str | None = None,
        reference: Mapping[str, list[float]] | None = None,
    ) -> Path:
        """Draw each output's mean and interval per scenario (one panel per output).

        ``reference`` maps an output to a known value per scenario (an analytic answer),
        drawn as crosses, so you see at a glance whether each interval covers it.
        """
        from ._plot import plot_results

        return plot_results(self, path, title=title, reference=reference)

    def __repr__(self) -> str:
        return (
            f"Results({len(self.scenarios)} scenario(s), {len(self.rows)} replication(s), "
            f"{len(self.failures)} failure(s), executor={self.executor!r}"
            f"{', interrupted' if self.interrupted else ''})"
        )


def _csv_value(value: Any) -> Any:
    if isinstance(value, float):
        return repr(value)  # round-trips exactly
    return value
