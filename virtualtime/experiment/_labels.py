"""How results are put into words: scenario labels, numbers, and the plain summary table.

The picture (``_plot``), the command line's tables (``_cli``) and anything else that shows
:class:`~virtualtime.experiment.Results` to a reader name scenarios and print numbers the same
way through these helpers.  They only read a ``Results`` (or its summary rows), so this module
imports neither the results nor the picture: both may import it.

Part of ``experiment``: may import ``shared``, ``options``, ``engine``, ``trio``, ``trace``,
``api``, ``sim`` (see tests/layout.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._results import Results, Summary


def scenario_label(results: Results, index: int) -> str:
    """A short label: the parameters that vary across scenarios (all of them if none vary)."""
    params = results.scenarios[index]
    varying = [
        name
        for name in results.parameters
        if len({repr(s.get(name)) for s in results.scenarios}) > 1
    ] or list(results.parameters)
    if not varying:
        return f"scenario {index}"
    return ", ".join(f"{name}={params.get(name)}" for name in varying)


def format_number(value: float, digits: int = 4) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:.{digits}g}"


def describe(rows: Sequence[Summary]) -> str:
    """A plain-text summary table (the CLI prints a richer one when rich is installed)."""
    lines = [f"{'scenario':>8}  {'output':<12} {'n':>5}  {'mean':>10}  {'± half-width':>12}"]
    for s in rows:
        lines.append(
            f"{s.scenario:>8}  {s.output:<12} {s.n:>5}  {format_number(s.mean):>10}  "
            f"{format_number(s.half_width):>12}"
        )
    return "\n".join(lines)
