"""A picture of an experiment: each output's mean and interval per scenario.

Part of ``experiment``: may import ``shared``, ``options``, ``engine``, ``trio``, ``trace``,
``api``, ``sim`` (see tests/layout.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .._shared._errors import InvalidTypeError, InvalidValueError
from ._labels import scenario_label
from ._model import shown

if TYPE_CHECKING:
    from ._results import Results


PICTURE_SUFFIXES = (".png", ".svg", ".pdf")
"""What :func:`plot_results` writes (the suffix of its path picks the format)."""


def check_picture_path(path: object) -> Path:
    """``path`` as a Path if it names a picture this module can write, else a clear error."""
    if not isinstance(path, (str, Path)):
        raise InvalidTypeError(f"path must be a str or a Path, got {shown(path)}")
    target = Path(path)
    if target.suffix.lower() not in PICTURE_SUFFIXES:
        raise InvalidValueError(
            f"path: a plot is written to {', '.join(PICTURE_SUFFIXES)}, got {shown(str(path))}"
        )
    return target


def plot_results(
    results: Results,
    path: str | Path,
    *,
    title: str | None = None,
    reference: Mapping[str, list[float]] | None = None,
) -> Path:
    """One panel per output: the mean of each scenario with its t-interval as error bars.

    ``reference`` optionally maps an output to a known value per scenario (an analytic
    result, say), drawn as a cross so you can see whether each interval covers it.  Every
    argument is checked (the format from the suffix of ``path`` first) before anything is
    drawn.
    """
    target = check_picture_path(path)
    if title is not None and (not isinstance(title, str) or len(title) > 500):
        raise InvalidValueError(
            f"title must be None or a str of at most 500 characters, got {shown(title)}"
        )
    if reference is not None:
        if not isinstance(reference, Mapping):
            raise InvalidTypeError(
                f"reference must be a mapping of output names to values, got {shown(reference)}"
            )
        count = len(results.scenarios)
        for name, known in reference.items():
            if (
                not isinstance(known, (list, tuple))
                or len(known) != count
                or any(isinstance(k, bool) or not isinstance(k, (int, float)) for k in known)
            ):
                raise InvalidValueError(
                    f"reference[{shown(name)}] must be a list of {count} numbers (one per "
                    f"scenario), got {shown(known)}"
                )
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError(
            "plotting needs matplotlib: pip install 'async-virtualtime[experiment]'"
        ) from error
    names = results.outputs
    if not names:
        raise InvalidValueError("there is nothing to plot: no replication finished")
    summaries = results.summary()
    labels = [scenario_label(results, i) for i in range(len(results.scenarios))]
    fig, axes = plt.subplots(
        len(names), 1, figsize=(max(6.0, 1.2 * len(labels) + 3.0), 3.2 * len(names)), squeeze=False
    )
    for axis, name in zip(axes[:, 0], names, strict=True):
        rows = [s for s in summaries if s.output == name]
        xs = list(range(len(rows)))
        means = [s.mean for s in rows]
        errors = [0.0 if math.isnan(s.half_width) else s.half_width for s in rows]
        axis.errorbar(xs, means, yerr=errors, fmt="o", capsize=6, color="#1f5fa8", label="mean")
        if reference and name in reference:
            axis.plot(xs, reference[name], "x", color="#c0392b", markersize=9, label="analytic")
            axis.legend(loc="best", fontsize=8)
        axis.set_xticks(xs)
        axis.set_xticklabels([labels[s.scenario] for s in rows], fontsize=8)
        axis.set_ylabel(name)
        n = min((s.n for s in rows), default=0)
        axis.set_title(
            f"{name}: mean and {results.confidence:.0%} t-interval (n ≥ {n} per scenario)",
            fontsize=9,
        )
        axis.grid(axis="y", alpha=0.3)
    if title:
        fig.suptitle(title, parse_math=False)
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target
